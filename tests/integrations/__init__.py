"""The hosts: Lambda, Azure Functions, ASGI, and the deploy templates."""
