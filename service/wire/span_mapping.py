"""Which spans mean what: the configurable mapping from OTLP spans to ETT events.

The defaults read the `ett.*` attributes and NVIDIA one-logger's span names, so a job
that already exports one-logger spans needs no configuration. A YAML file
(`ETT_OTLP_MAPPING`) can rename the attributes and add or replace span rules; docs/otlp.md
describes the format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from service.errors import ConfigError

FIELDS = ("job_id", "attempt", "model", "gpus", "team", "rank", "phase", "cause", "step")


@dataclass(frozen=True)
class SpanRule:
    """What one span name becomes.

    `attempt`: the span is the attempt itself (allocated at its start, released at its
    end). Otherwise `phase` is started and ended with the span; `background` marks it as
    overlapping other work; `checkpoint` adds a durable checkpoint at the span's end whose
    snapshot is the span's start (the state saved is the one the save began from).
    """

    phase: str | None = None
    attempt: bool = False
    background: bool = False
    checkpoint: bool = False


# NVIDIA one-logger's standard span names. `checkpoint_save_async` is the time training
# waited for the async save to be handed off: background, and not yet durable when it ends
# (one-logger reports the durable success later), so it claims no checkpoint.
ONE_LOGGER_SPANS: Mapping[str, SpanRule] = {
    "application": SpanRule(attempt=True),
    "dist_init": SpanRule(phase="process_group_init"),
    "data_loader_initialization": SpanRule(phase="preproc_creation"),
    "model_initialization": SpanRule(phase="train_module_creation"),
    "optimizer_initialization": SpanRule(phase="train_module_creation"),
    "checkpoint_load": SpanRule(phase="checkpoint_load"),
    "training_loop": SpanRule(phase="training"),
    "validation_loop": SpanRule(phase="validation"),
    "checkpoint_save_sync": SpanRule(phase="checkpoint_save", checkpoint=True),
    "checkpoint_save_async": SpanRule(phase="checkpoint_save", background=True),
}


@dataclass(frozen=True)
class SpanMapping:
    # Event field -> the attribute keys tried in order (span attributes before resource).
    attributes: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: {name: (f"ett.{name}",) for name in FIELDS})
    spans: Mapping[str, SpanRule] = field(default_factory=lambda: dict(ONE_LOGGER_SPANS))
    # The attempt of spans that carry no attempt attribute (a job that never restarts).
    default_attempt: int = 0

    def rule_for(self, name: str, phase_attr: Any) -> SpanRule | None:
        if isinstance(phase_attr, str) and phase_attr:
            base = self.spans.get(name, SpanRule())
            return replace(base, phase=phase_attr, attempt=False)
        return self.spans.get(name)

    def value(self, attributes: Mapping[str, Any], name: str) -> Any:
        for key in self.attributes.get(name, ()):
            if key in attributes:
                return attributes[key]
        return None


def _rule(name: str, doc: Any) -> SpanRule:
    if isinstance(doc, str):
        return SpanRule(phase=doc)
    if not isinstance(doc, dict):
        raise ConfigError(f"otlp mapping: spans.{name}: must be a phase name or a mapping")
    unknown = set(doc) - {"phase", "attempt", "background", "checkpoint"}
    if unknown:
        raise ConfigError(f"otlp mapping: spans.{name}: unknown keys {sorted(unknown)}")
    rule = SpanRule(phase=doc.get("phase"), attempt=bool(doc.get("attempt", False)),
                    background=bool(doc.get("background", False)),
                    checkpoint=bool(doc.get("checkpoint", False)))
    if rule.attempt == (rule.phase is not None):
        raise ConfigError(f"otlp mapping: spans.{name}: give either a phase or attempt: true")
    if rule.phase is not None and not isinstance(rule.phase, str):
        raise ConfigError(f"otlp mapping: spans.{name}.phase: must be a string")
    return rule


def mapping_from_doc(doc: Any) -> SpanMapping:
    """Build a mapping from a parsed YAML document (see docs/otlp.md)."""
    if doc is None:
        return SpanMapping()
    if not isinstance(doc, dict):
        raise ConfigError("otlp mapping: the file must hold a mapping")
    unknown = set(doc) - {"attributes", "spans", "one_logger", "default_attempt"}
    if unknown:
        raise ConfigError(f"otlp mapping: unknown keys {sorted(unknown)}")
    base = SpanMapping()
    attributes = dict(base.attributes)
    for name, keys in (doc.get("attributes") or {}).items():
        if name not in FIELDS:
            raise ConfigError(f"otlp mapping: attributes.{name}: not one of {list(FIELDS)}")
        keys = [keys] if isinstance(keys, str) else keys
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or not keys:
            raise ConfigError(f"otlp mapping: attributes.{name}: must be a key or a list of keys")
        attributes[name] = tuple(keys)
    spans = dict(ONE_LOGGER_SPANS) if doc.get("one_logger", True) else {}
    for name, rule in (doc.get("spans") or {}).items():
        spans[str(name)] = _rule(str(name), rule)
    default_attempt = doc.get("default_attempt", 0)
    if type(default_attempt) is not int or default_attempt < 0:
        raise ConfigError("otlp mapping: default_attempt: must be an integer >= 0")
    return SpanMapping(attributes=attributes, spans=spans, default_attempt=default_attempt)


def load_mapping(path: Path | None) -> SpanMapping:
    """The mapping of `ETT_OTLP_MAPPING`, or the defaults when unset."""
    if path is None:
        return SpanMapping()
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"otlp mapping {path}: {exc}") from None
    return mapping_from_doc(doc)
