"""The operator's web console, over HTTP and in headless Chromium."""
