"""idemflow.testing, the kit users test their workflows with."""
