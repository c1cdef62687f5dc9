"""Scorers: what judges a turn or a session line, and the scorers file that names them."""
