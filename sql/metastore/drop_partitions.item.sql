PARTITION ({spec})
