"""Tests of readers/."""
