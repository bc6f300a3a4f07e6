"""Read models and admin actions shared by the CLI and (later) the dashboard."""
