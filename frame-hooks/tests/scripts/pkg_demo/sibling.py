"""The module main.py imports from its own directory."""


def greet():
    return "hello from the sibling module"
