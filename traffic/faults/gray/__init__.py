"""Gray failures on the wire (nftables): silent and bursty loss, corruption, and what they share."""
