"""Platform integrations: the Lambda and Azure Functions hosts and HTTP answers."""
