"""Values and formats every layer shares: row layout, the engine's request types,
policies, limit specs, plans and number models. Nothing here does I/O or imports a layer above."""
