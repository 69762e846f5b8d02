package timewarp

const supported = true
