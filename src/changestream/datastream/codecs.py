"""Moved: every encoding of a column value is in :mod:`changestream.codecs`."""

from changestream.deprecation import moved

__getattr__ = moved(
    __name__,
    "changestream.codecs",
    {
        "Codec": "Codec",
        "identity": "identity",
        "nullable": "nullable",
        "micros_text": "micros_text",
        "millis_text": "millis_text",
        "json_encoder": "event_encoder",
        "record_decoder": "record_decoder",
        "text_encoder": "text_encoder",
        "text_decoder": "text_decoder",
    },
)
