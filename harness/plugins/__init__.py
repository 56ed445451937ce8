"""pytest plugins of the guide's test suite, one job each; conftest.py loads them."""
