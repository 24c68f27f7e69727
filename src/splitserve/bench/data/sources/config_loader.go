package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Config is what the service reads at start-up.
type Config struct {
	ListenAddr   string        `json:"listen_addr"`
	ReadTimeout  time.Duration `json:"read_timeout"`
	WriteTimeout time.Duration `json:"write_timeout"`
	MaxBodyBytes int64         `json:"max_body_bytes"`
	Workers      int           `json:"workers"`
	LogLevel     string        `json:"log_level"`
}

var ErrMissingAddr = errors.New("config: listen_addr is required")

func Default() Config {
	return Config{
		ListenAddr:   "127.0.0.1:8080",
		ReadTimeout:  15 * time.Second,
		WriteTimeout: 30 * time.Second,
		MaxBodyBytes: 1 << 20,
		Workers:      4,
		LogLevel:     "info",
	}
}

// Load reads a JSON file over the defaults and validates the result.
func Load(path string) (Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("config: parse %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func (c Config) Validate() error {
	if c.ListenAddr == "" {
		return ErrMissingAddr
	}
	if c.Workers < 1 || c.Workers > 256 {
		return fmt.Errorf("config: workers must be between 1 and 256, got %d", c.Workers)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("config: unknown log_level %q", c.LogLevel)
	}
	return nil
}
