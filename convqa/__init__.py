"""convqa: open-domain conversational question answering."""
from .errors import ConfigError, ConvQAError, DataError
from .types import Answer, Conversation, Hit, Passage, QueryId, Turn

__version__ = "0.1.0"
__all__ = ["Answer", "ConfigError", "Conversation", "ConvQAError", "DataError", "Hit", "Passage",
           "QueryId", "Turn", "__version__"]
