"""Stand-ins for services at a true process boundary (an HTTP server), never for our own code."""
