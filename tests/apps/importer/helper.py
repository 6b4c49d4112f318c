"""A sibling module: the app imports it by name from its own directory."""

GREETING = "hello from helper"
