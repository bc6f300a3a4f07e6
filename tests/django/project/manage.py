#!/usr/bin/env python
"""The test project's manage.py (the tests run it as a subprocess too)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
