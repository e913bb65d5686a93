"""Offline side: loading captures, classification rules, reports and the command line."""
