// Keeps a layer library non-empty while it has no sources yet.
