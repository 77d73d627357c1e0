"""Hypothesis strategies: plausible multi-attempt event streams, and garbage-ish ones."""

from __future__ import annotations

from hypothesis import strategies as st

from ett_core import Event
from ett_core.events import EVENT_TYPES
from ett_core.instants import format_rfc3339_us

MINUTE = 60_000_000
PHASES = (
    "scheduling",
    "launcher_init",
    "init_plugins",
    "checkpoint_load",
    "compilation",
    "training",
    "training",
    "checkpoint_save",
    "data_stall",
    "teardown",
    "final_checkpoint",
    "mystery",
)
Stream = tuple[list[Event], int, int]  # events, now_us, heartbeat_timeout_us


class _Emitter:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, type: str, ts: int, attempt: int, **fields) -> None:
        fields.setdefault("attrs", {})
        self.events.append(
            Event(
                event_id=f"e{len(self.events):05d}",
                ts_us=ts,
                job_id="job",
                attempt=attempt,
                model="m",
                type=type,
                **fields,
            )
        )


@st.composite
def plausible_streams(draw: st.DrawFn) -> Stream:
    """Attempts in sequence with nested phases, checkpoints, failures and releases, each
    part sometimes missing; zero-length steps make same-instant ties common."""
    emit = _Emitter()
    step = st.integers(0, 30 * MINUTE)
    t = draw(st.integers(0, 2 * 10**15))
    for attempt in range(draw(st.integers(1, 4))):
        t += draw(step)
        if draw(st.integers(0, 9)):
            emit("allocated", t, attempt, gpus=draw(st.sampled_from([None, 1, 8, 64])))
        open_phases: list[str] = []
        if draw(st.booleans()):
            # Most real attempts are one long training phase with the rest nested inside.
            t += draw(step)
            emit("phase_start", t, attempt, phase="training")
            open_phases.append("training")
        for _ in range(draw(st.integers(0, 14))):
            t += draw(step)
            action = draw(
                st.sampled_from(["start", "start", "end", "end", "checkpoint", "beat", "failure"])
            )
            if action == "start":
                phase = draw(st.sampled_from(PHASES))
                background = draw(st.integers(0, 9)) == 0
                emit(
                    "phase_start",
                    t,
                    attempt,
                    phase=phase,
                    attrs={"background": True} if background else {},
                )
                open_phases.append(phase)
            elif action == "end":
                if open_phases and draw(st.integers(0, 5)):
                    phase = open_phases.pop(draw(st.integers(0, len(open_phases) - 1)))
                else:
                    phase = draw(st.sampled_from(PHASES))
                emit("phase_end", t, attempt, phase=phase)
            elif action == "checkpoint":
                snapshot = t - draw(st.integers(-MINUTE, 20 * MINUTE))
                attrs = draw(
                    st.sampled_from(
                        [
                            {},
                            {"snapshot_ts": snapshot / 1_000_000},
                            {"snapshot_ts": format_rfc3339_us(snapshot)},
                            {"snapshot_ts": "garbage"},
                        ]
                    )
                )
                emit("checkpoint", t, attempt, attrs=attrs)
            elif action == "beat":
                emit(
                    "heartbeat",
                    t,
                    attempt,
                    rank=draw(st.sampled_from([None, 0, 0, 1])),
                    team=draw(st.sampled_from([None, "a", "b"])),
                )
            elif draw(st.integers(0, 3)):
                emit("heartbeat", t, attempt)  # failures are rarer than other events
            else:
                cause = draw(st.sampled_from(["infra", "user", "preemption", "weird"]))
                emit("failure", t, attempt, attrs={"cause": cause})
        if draw(st.integers(0, 4)):
            t += draw(step)
            reason = draw(st.sampled_from(["completed", "failed", "preempted", "cancelled", "?"]))
            emit("released", t, attempt, attrs={"reason": reason})
    now = t + draw(st.integers(-10 * MINUTE, 120 * MINUTE))
    return emit.events, now, draw(st.integers(0, 60 * MINUTE))


@st.composite
def garbage_streams(draw: st.DrawFn) -> Stream:
    """Any event type at any instant of any small attempt, on any rank, with odd attrs."""
    emit = _Emitter()
    base = draw(st.integers(0, 2 * 10**15))
    for _ in range(draw(st.integers(1, 30))):
        emit(
            draw(
                st.sampled_from(EVENT_TYPES)
            ),
            base + draw(st.integers(0, 120)) * MINUTE,
            draw(st.integers(0, 3)),
            phase=draw(st.sampled_from(PHASES)),
            gpus=draw(st.sampled_from([None, 1, 8])),
            rank=draw(st.sampled_from([None, 0, 2])),
            attrs=draw(
                st.sampled_from(
                    [
                        {},
                        {"background": True},
                        {"cause": "user"},
                        {"reason": "failed"},
                        {"reason": "cancelled"},
                        {"snapshot_ts": base / 1_000_000},
                    ]
                )
            ),
        )
    now = base + draw(st.integers(0, 200)) * MINUTE
    return emit.events, now, draw(st.integers(0, 30)) * MINUTE


streams = st.one_of(plausible_streams(), garbage_streams())
