"""Stand-ins and process helpers shared by the integration tests, the e2e tests and the demo."""
