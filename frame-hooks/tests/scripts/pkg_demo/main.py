"""Imports a module that sits next to it, as scripts do (`python main.py` puts the
script's directory first on sys.path)."""

import sibling

print(sibling.greet())
