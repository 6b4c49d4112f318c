"""The app's side of the wall."""
