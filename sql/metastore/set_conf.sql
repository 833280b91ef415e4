SET {key}={value}
