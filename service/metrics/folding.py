"""Bounds on the series /metrics exports: teams (`ETT_METRICS_MAX_TEAMS`) and models per
team (`ETT_METRICS_MAX_MODELS_PER_TEAM`).

Model and team names come from writers, and each one added a dozen series to /metrics
(5,000 invented models made 30,665 lines; 1,500 invented teams 109,758). The teams first
seen earliest keep their own series; every series of the rest is summed into
`team="other"` (and `model="other"`), counted in `ett_metrics_folded_teams`. Within a kept
team, the models first seen earliest keep their own series; the rest are summed into
`model="other"` and counted in `ett_metrics_folded_models{team}`. The earliest-first order
is stable: a new name never displaces one already exported, so no counter moves between
series (and never goes down). `other` is reserved at ingest, as a model and as a team, so
the folded series never mix with a real one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from service.results.snapshot import MODEL_KEYED_FIELDS, Key, Snapshot

OTHER = "other"
_LAST = datetime.max


def kept_models(first_seen: Iterable[tuple[str, str, datetime | None]],
                seen: Iterable[tuple[str, str]], per_team: int) -> set[tuple[str, str]]:
    """The (model, team) pairs that keep their own series: per team, the `per_team` first
    seen (ties by name); a pair with no first-seen time (its jobs pruned) sorts last."""
    first: dict[tuple[str, str], datetime] = {}
    for model, team, at in first_seen:
        first[(model, team)] = at.replace(tzinfo=None) if at is not None else _LAST
    by_team: dict[str, list[tuple[datetime, str]]] = {}
    for model, team in set(first) | set(seen):
        by_team.setdefault(team, []).append((first.get((model, team), _LAST), model))
    kept: set[tuple[str, str]] = set()
    for team, models in by_team.items():
        kept.update((model, team) for _at, model in sorted(models)[:per_team])
    return kept


def kept_teams(first_seen: Iterable[tuple[str, str, datetime | None]],
               seen: Iterable[str], max_teams: int) -> set[str]:
    """The teams that keep their own series: the `max_teams` first seen (ties by name); a
    team with no first-seen time sorts last."""
    first: dict[str, datetime] = {}
    for _model, team, at in first_seen:
        at = at.replace(tzinfo=None) if at is not None else _LAST
        first[team] = min(first.get(team, _LAST), at)
    teams = set(first) | set(seen)
    return {team for _at, team in sorted((first.get(t, _LAST), t) for t in teams)[:max_teams]}


def fold_teams(snap: Snapshot, kept: set[str]) -> None:
    """Rewrite the snapshot's team-keyed figures in place: every series of a team outside
    `kept` becomes `team="other"` and `model="other"` (summed); count the folded teams."""
    folded: set[str] = set()

    def team_of(team: str) -> str:
        if team in kept:
            return team
        folded.add(team)
        return OTHER

    def pair(key: Key) -> Key:
        return key if key[1] in kept else (OTHER, team_of(key[1]), *key[2:])

    def first(key: Key) -> Key:
        return key if key[0] in kept else (team_of(key[0]), *key[1:])

    _fold_model_keyed(snap, pair)
    sum_counts = lambda a, b: [x + y for x, y in zip(a, b, strict=True)]  # noqa: E731
    snap.tts_buckets = _fold(snap.tts_buckets, first, sum_counts)
    snap.tts_sum = _fold(snap.tts_sum, first)
    snap.ttr_buckets = _fold(snap.ttr_buckets, first, sum_counts)
    snap.ttr_sum = _fold(snap.ttr_sum, first)
    pairs = lambda a, b: (a[0] + b[0], a[1] + b[1])  # noqa: E731
    for levels in snap.ratios.values():
        levels["model"] = _fold(levels["model"], pair, pairs)  # type: ignore[assignment]
        levels["team"] = _fold(levels["team"], first, pairs)  # type: ignore[assignment]
    snap.folded_teams = len(folded)


def _fold_model_keyed(snap: Snapshot, rename: Callable[[Key], Key]) -> None:
    for name in MODEL_KEYED_FIELDS:
        setattr(snap, name, _fold(getattr(snap, name), rename))


def _fold(values: dict[Key, float], rename: Callable[[Key], Key],
          add: Callable[[object, object], object] = lambda a, b: a + b) -> dict:  # type: ignore[operator]
    out: dict[Key, object] = {}
    for key, value in values.items():
        new = rename(key)
        out[new] = add(out[new], value) if new in out else value
    return out  # type: ignore[return-value]


def fold_models(snap: Snapshot, kept: set[tuple[str, str]]) -> None:
    """Rewrite the snapshot's model-keyed figures in place: pairs outside `kept` become
    `other` of their team (summed); count the folded models per team."""
    folded: dict[str, set[str]] = {}

    def pair(key: Key) -> Key:
        model, team = key[0], key[1]
        if (model, team) in kept:
            return key
        folded.setdefault(team, set()).add(model)
        return (OTHER, *key[1:])

    kept_names = {model for model, _team in kept}
    _fold_model_keyed(snap, pair)
    snap.unknown_phase_events = _fold(
        snap.unknown_phase_events, lambda k: k if k[0] in kept_names else (OTHER,))
    for levels in snap.ratios.values():
        levels["model"] = _fold(levels["model"], pair,  # type: ignore[assignment]
                                lambda a, b: (a[0] + b[0], a[1] + b[1]))  # type: ignore[index]
    snap.folded_models = {team: len(models) for team, models in sorted(folded.items())}
