"""Service levels as data: the model (`model`) and its loading from YAML (`load`)."""
