"""Tests of the serving layer every daemon shares."""
