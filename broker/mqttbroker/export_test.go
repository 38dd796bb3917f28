package mqttbroker

// NewQuickAckConn lets the benchmark give raw paho the Broker's connection
// wrapper, so the raw figure is not held back by Mosquitto's Nagle stall.
var NewQuickAckConn = newQuickAckConn
