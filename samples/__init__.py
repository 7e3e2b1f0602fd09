"""Runnable samples of idemflow: each a workflow written as a user would, a demo and a checker."""
