package matcher

import "fmt"

// Selector is matchers as an operator writes them, checked and compiled, for whoever selects devices in
// the silences' syntax (the notifier's routes): all of them must match.
type Selector struct{ matchers []Compiled }

// NewSelector parses each text with Parse; no texts select everything.
func NewSelector(texts []string) (Selector, error) {
	if len(texts) > MaxMatchers {
		return Selector{}, fmt.Errorf("%w: %d matchers, at most %d", ErrCostly, len(texts), MaxMatchers)
	}
	s := Selector{matchers: make([]Compiled, len(texts))}
	for i, text := range texts {
		m, err := Parse(text)
		if err != nil {
			return Selector{}, err
		}
		if s.matchers[i], err = Compile(m); err != nil {
			return Selector{}, err
		}
	}
	return s, nil
}

// Matches reports whether every matcher matches the value value gives for its label.
func (s Selector) Matches(value func(label string) string) bool {
	for i := range s.matchers {
		if !s.matchers[i].Matches(value(s.matchers[i].Label)) {
			return false
		}
	}
	return true
}
