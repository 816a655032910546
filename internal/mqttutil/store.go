// Package mqttutil holds what every paho client of heartbeatd and its tests shares.
package mqttutil

import (
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// NewStore is paho's memory store handing out copies of stored publishes. On a reconnect paho sets the
// DUP flag of every stored publish while its writer may still be sending one a Publish call stored
// meanwhile: a data race inside paho (eclipse-paho/paho.mqtt.golang#703, open in v1.5.1) that a
// QoS 1 publisher meets when it publishes through a broker outage. The copy takes the flag instead.
func NewStore() mqtt.Store { return resumeSafeStore{mqtt.NewMemoryStore()} }

type resumeSafeStore struct{ *mqtt.MemoryStore }

func (s resumeSafeStore) Get(key string) packets.ControlPacket {
	m := s.MemoryStore.Get(key)
	p, ok := m.(*packets.PublishPacket)
	if !ok {
		return m
	}
	// Field by field: the writer sets RemainingLength as it sends, so the header is not copied whole.
	cp := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	cp.Dup, cp.Qos, cp.Retain = p.Dup, p.Qos, p.Retain
	cp.TopicName, cp.MessageID, cp.Payload = p.TopicName, p.MessageID, p.Payload
	return cp
}
