"""Helpers the test modules share (a test module is never imported as a library)."""
