"""ETT telemetry client: record a training job's timeline and ship it to the ETT service.

Standard library only; PyTorch helpers live in :mod:`ett_client.torch_helpers`.
"""

from ett_client.errors import ConfigurationError, EttClientError, InvalidEventError
from ett_client.recorder import Recorder

__all__ = ["ConfigurationError", "EttClientError", "InvalidEventError", "Recorder"]
__version__ = "0.1.0"
