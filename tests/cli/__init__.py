"""The idemflow command line."""
