"""Tests of builders/."""
