module groupwarden.local/devstack/pause

go 1.22
