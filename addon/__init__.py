"""Capture side: the capture writer, the stdio tee and the mitmproxy addon."""
