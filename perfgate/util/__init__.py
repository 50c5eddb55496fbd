"""Helpers with no perfgate domain in them (statistics on arrays, atomic files, paths kept inside their root, input validation, names, number formatting, the version)."""
