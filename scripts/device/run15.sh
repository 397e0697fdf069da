# the rest of the architecture sweep (b1, b32), then the CUDA model zoo (issue 20)
. scripts/device/pre.sh
bench sweep $(( ${SW:-300} )) --models gpt2,vit_b_16,t5enc,regnet_y_1_6gf,vgg16,distilbert,resnet152 --batches 1,32
zoo fp16 fp32
