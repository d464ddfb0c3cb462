"""A user's own package, outside the trainer: its task trains with the trainer as a library."""
