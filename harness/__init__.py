"""Test harness: launch snippets, compare their output with what the pages show."""
