"""``idemflow console``: an operations console in the browser, served by the package itself.

Server-rendered pages and a JSON API over :mod:`idemflow.admin`: requests with filters and
keyset paging, a request's step timeline (what ``idemflow runs show`` lists), dead letters with
redrive, and retry, cancel, resume and abort as protected POSTs. Nothing is built or fetched at
run time: the templates, stylesheet and script ship as package data. docs/console.md says how
to run it; the modules here are the command's, not a library API.
"""
