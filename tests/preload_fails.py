"""A preload module that fails to import: the zygote must say so and stay as it was."""

raise RuntimeError("this module cannot be imported")
