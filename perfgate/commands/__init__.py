"""What each command does below the command line (list, run, baseline, calibrate, report, doctor, init, tensorboard, schemas) and the notebook API."""
