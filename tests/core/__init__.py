"""Values and formats: keys, serialization, codecs, the row format, errors, telemetry."""
