"""The pure ETT engine: events -> attempt timelines -> segments -> Level-1/Level-2.

Standard library only (a test enforces it); `now` and the heartbeat timeout are passed in.
"""

from ett_core.compute import JobComputation, compute_job
from ett_core.diagnostics import Diagnostics
from ett_core.events import Event
from ett_core.level1 import Level1
from ett_core.result import AttemptResult, JobResult
from ett_core.segments import Segment
from ett_core.taxonomy import Taxonomy, TaxonomyError

__all__ = [
    "AttemptResult",
    "Diagnostics",
    "Event",
    "JobComputation",
    "JobResult",
    "Level1",
    "Segment",
    "Taxonomy",
    "TaxonomyError",
    "compute_job",
]
