"""datatypes."""
