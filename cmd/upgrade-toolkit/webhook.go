package main

import (
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

func init() { manager.Register(webhook.Setup) }
