"""The dashboard's pages for people, one module per page group; each handler takes the dashboard,
the request and the signed-in user, asks :mod:`errands.services` and renders the read model it gets."""
