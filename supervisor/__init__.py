"""The OS side."""
