package exec

// DeviceDecoder is a decode Program that samples on its device and hands each chosen
// token to the next step there: a step returns a token id, and the host never sees the
// logits. Session.Generate uses it when the model is opened with TokenHandoff and the
// generation needs nothing of the logits on the host (a plain Sampler, no OnLogits).
type DeviceDecoder interface {
	// StartDecode begins a run of decode steps on st, sampled with sp.
	StartDecode(st State, sp DeviceSampling) (DecodeStream, error)
}

// DeviceSampling is what a device sampler needs to draw the tokens a Sampler would:
// its parameters and seed; step k of a stream draws with counter FirstDraw+k.
type DeviceSampling struct {
	Params    SamplingParams
	Seed      uint64
	FirstDraw int
}

// DecodeStream runs decode steps that may be in flight two at a time: step k+1 is
// submitted, reading the token step k chose on the device, before the host waits for
// token k. A step submitted ahead of a stop is undone by Discard, so the session's state
// stays what it would have been had the step never run.
type DecodeStream interface {
	// Submit queues the next step at context position pos: its input is token, or, when
	// token is negative, the token the previous step of the stream chose on the device.
	// It does not wait for the step. Cancellation is the caller's to check between steps:
	// an error here is the device's, and leaves the state undefined.
	Submit(pos int, token int32) error
	// Token waits for the oldest step not yet waited for and returns the token it chose.
	Token() (int32, error)
	// Discard undoes the newest step (waiting for it first): the state, and the logits
	// Close leaves, are those after the step before it. Only the newest step can be
	// discarded, only once, and only when it was submitted before the step before it was
	// read (Token): a step that ran ahead.
	Discard() error
	// Close waits for what is still in flight (which must not be left unread: Token or
	// Discard it) and returns the logits after the last step kept, row-major (valid until
	// the program runs again).
	Close() ([]float32, error)
}
