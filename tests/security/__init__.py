"""Regression tests for security and bad-input defects: each failed before its fix."""
