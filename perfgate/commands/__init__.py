"""What each command does below the command line (run, calibrate, doctor, init, tensorboard, schemas) and the notebook API."""
