PARTITION ({spec}) LOCATION {location}
