"""Certification: a lane's suite run on this host, judged, signed and advertised."""
