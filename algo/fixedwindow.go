package algo

// fixedWindow decides a request against one counter per window. Windows are
// aligned to the Unix epoch (a 1-minute window starts on the minute), or
// to the calendar (Config.Calendar: calendarWindow), so every node that
// agrees on the time agrees on the window. An instant before the stored
// window is counted in the stored window: time moving backwards never
// reopens a closed window.
func (p *params) fixedWindow(s *state, now, cost int64) verdict {
	start, used := s.a, s.b
	// Only a request past the stored window needs the (dividing) window
	// computation.
	if now >= start+p.period || (start == 0 && used == 0) {
		if ws := p.epochStart(now); ws > start || (start == 0 && used == 0) {
			start, used = ws, 0
		}
	}
	end := start + p.period
	var v verdict
	if cost > p.limit {
		v.retryAfter = Never
	} else if used+cost > p.limit {
		v.retryAfter = dur(end - now)
	} else {
		v.allowed = true
		if cost > 0 {
			used += cost
			s.a, s.b = start, used
		} else if used == p.limit {
			v.retryAfter = dur(end - now)
		}
	}
	v.remaining = max(p.limit-used, 0) // a settled reservation may leave a debt
	if used > 0 {
		v.resetAfter = dur(end - now)
	}
	return v
}

// calendarWindow is fixedWindow on the calendar's windows, whose lengths
// differ. It is a function of its own, chosen in decide, and repeats
// fixedWindow's count rather than share it, so that the epoch's windows,
// which nearly every rule counts in, pay nothing for the calendar: a
// shared count is a call the compiler does not inline, and a choice made
// in fixedWindow makes it a function with a frame (13 and 4 more
// instructions a decision, +8% and +2.5% in BenchmarkLimiter/fixed_window
// under callgrind).
func (p *params) calendarWindow(s *state, now, cost int64) verdict {
	start, used := s.a, s.b
	end := p.cal.end(start)
	if now >= end || (start == 0 && used == 0) {
		if ws, we := p.cal.window(now); ws > start || (start == 0 && used == 0) {
			start, used, end = ws, 0, we
		}
	}
	var v verdict
	if cost > p.limit {
		v.retryAfter = Never
	} else if used+cost > p.limit {
		v.retryAfter = dur(end - now)
	} else {
		v.allowed = true
		if cost > 0 {
			used += cost
			s.a, s.b = start, used
		} else if used == p.limit {
			v.retryAfter = dur(end - now)
		}
	}
	v.remaining = max(p.limit-used, 0)
	if used > 0 {
		v.resetAfter = dur(end - now)
	}
	return v
}
