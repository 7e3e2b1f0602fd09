"""The sample applications and the chaos runs over them."""
