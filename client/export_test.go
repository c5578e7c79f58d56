package client

// DefinitionReads is how many definitions c read to name registered versions.
func DefinitionReads(c *Client) int {
	c.defNames.mu.Lock()
	defer c.defNames.mu.Unlock()
	return c.defNames.reads
}
